"""LSVI-UCB++ (He, Zhao, Zhou & Gu, ICML 2023) and DP-LSVI-UCB++ (Sahu 2025, Algorithm 1, corrected).

Episode k, read top to bottom (Sahu 2025, Algorithm 1 line numbers in brackets):

1. Release, for every h, Lambda-tilde_{k,h} = (lambda + 2 lambda-tilde) I +
   sum_{i<k} sigma-bar_{i,h}^{-2} phi_i phi_i^T + K1_{k,h}, with a *fresh* GOE
   K1_{k,h} [lines 1 and 26, corrected]; eigenvalues floored at lambda + lambda-tilde.
   Non-private: the exact Sigma_{k,h} = lambda I + sum ... (no noise).
2. Decide the switch once, before the backward pass: switch iff some h has
   det Lambda-tilde_{k,h} >= 2 det Lambda-tilde_{k_last,h} [line 10]; then
   k_last = k [line 13, moved out of the h loop].
3. Backward, h = H-1..0 [lines 5-21]: release w-hat, w-check, w-bar (V, V-check,
   V^2 targets) with fresh Gaussian noise phi_1, phi_2, phi_3 per (k, h)
   [lines 6-8]; at a switch
   Q-hat_h = clip(min{r + w-hat^T phi + beta_opt ||phi||, Q-hat_h}, 0, H) [line 11],
   Q-check_h = clip(max{r + w-check^T phi - beta-hoef ||phi||, Q-check_h}, 0, H)
   [line 12 corrected: the proof of Lemma B.5 uses "-" and max], V = max_a Q.
   Practical constants [D] (issue 16): both bonuses also carry
   noise_z noise_v ||Lambda-tilde^-1 phi||_2, noise_z standard deviations of the
   target noise's part of w^T phi, so that the running min/max stays safe; without
   it Q-hat collapsed to 0 in every cell (docs/online.md). ``monotone=False``
   (new estimate instead of min/max) and ``switch_margin`` (nats added to ln 2)
   are options for experiments, off in both constant sets.
4. Act greedily on Q-hat [lines 20, 23].
5. Forward, once the trajectory is known [lines 9, 24-26; line 9 moved here]: at (s_h, a_h),
   V-bar = [w-bar^T phi]_{[0,H^2]} - [w-hat^T phi]_{[0,H]}^2,
   E = min{beta-var ||phi||, H^2} + min{2 H beta-hoef ||phi||, H^2},
   D = min{d_coef (w-hat^T phi - w-check^T phi + 2 beta-hoef ||phi||), d_cap},
   sigma-bar = max{sqrt(max(V-bar + E + D + H, 0)), sigma_min, floor_coef ||phi||^{1/2}},
   and the weight sigma-bar^{-2} <= 1/sigma_min^2 enters the statistics.

Every quantity inside the loop is computed from released statistics (and the
current user's own phi, which only enters her own term), so the weights and
switches are post-processing of the releases. The statistics are
non-cumulative: each release is the exact weighted sum plus *one* fresh noise
(line 26 adds K1 cumulatively; Lemmas B.1 and B.2 use one K1). Privacy: 4HK
releases of rho/(4HK) each, fresh noise for every (k, h) (line 1 draws once;
the text of Section 3 and the proof of Theorem A.1 compose 4HK independent
releases). Every departure and why: docs/online.md, "Departures from the papers".
"""

from __future__ import annotations

import math

import numpy as np

from privaudit.core.errors import UsageError
from privaudit.online.linear.constants_pp import PlusPlusConstants
from privaudit.online.linear.base import PRIVACY_UNIT, LinearExplorer, goe_event, vector_event
from privaudit.online.linear.lattice import LatticeStats, choose_lattice, release
from privaudit.online.linear.numerics import FlooredInverse, RidgeStats, greedy
from privaudit.online.linear.numerics import clip_ufunc as _CLIP
from privaudit.privacy.events import PrivacyEvent

_LOG2 = math.log(2.0)


class LSVIUCBPlusPlus(LinearExplorer):
    """LSVI-UCB++ (He et al. 2023); ``private=True`` gives DP-LSVI-UCB++ (Sahu 2025).

    Parameters
    ----------
    phi : array_like, shape (S, A, d)
        Public feature map (norms enforced <= 1).
    reward : array_like, shape (H, S, A)
        Public reward function r_h(s, a) in [0, 1] (He et al. and Sahu 2025
        assume it known: Q = r + w^T phi + bonus).
    horizon, n_episodes : int
    constants : PlusPlusConstants
    private : bool
        Release noisy statistics (DP-LSVI-UCB++). With all noise scales 0 the
        private path still runs (eigen-floored release), so rho = inf can be
        compared with the exact Sherman-Morrison path of the non-private one.
    rng : numpy.random.Generator, optional
    """

    def __init__(self, phi, reward, horizon, n_episodes, constants: PlusPlusConstants, *,
                 private: bool = False, rng=None):
        super().__init__(phi, horizon, n_episodes, rng=rng)
        self.r_flat = self._checked_reward(reward)
        if constants.optimistic not in ("bernstein", "hoeffding"):
            raise UsageError(f"`optimistic` must be 'bernstein' or 'hoeffding'. "
                             f"Got {constants.optimistic!r}.")
        self.c = constants
        self.private = bool(private)
        self.algo = "dp-lsvi-ucb-pp" if private else "lsvi-ucb-pp"
        if self.private and constants.noise_gram > 0:
            # exact discrete Gaussian noise on integer lattice statistics (privaudit.online.linear.lattice)
            self._use_lattice(choose_lattice(math.sqrt(2.0) * constants.noise_gram, constants.noise_v,
                                             constants.noise_v2, weighted=True))
            self.lat = LatticeStats(self.H, self.S, self.d, self.lattice, self.K, constants.w_max,
                                    float(self.H) ** 2)
            lat = self.lattice
            self._unit_in = np.ldexp(1.0, np.array([lat.value_bits, lat.value_bits, lat.square_bits]))[:, None]
            self._unit_out = np.ldexp(1.0, -np.array([lat.target_bits, lat.target_bits,
                                                      lat.square_target_bits]))[:, None]
        self.stats = RidgeStats(self.H, self.S, self.d, constants.lam + constants.shift)
        self._public = (constants.lam + constants.shift) * np.eye(self.d)
        self._inverse = FlooredInverse(constants.floor)
        H, S, SA = self.H, self.S, self.S * self.A
        # The backward pass works in units of the V grid, 2^-VB (lattice; 1 without it), so that V on the
        # grid is one rint: every stored Q and V below is ``_scale`` times its real value (a power of two:
        # exact). Q state per h, 4 rows (H, 4, S*A): [0, Q-check, Q-hat, H]; a switch sets rows (1, 2) to
        # clip(x, rows (1, 0), rows (3, 2)) in one ufunc, i.e. Q-check = clip(new, Q-check_old, H) = min{max{new,
        # old}, H} and Q-hat = clip(new, 0, Q-hat_old) = max{min{new, old}, 0} (Sahu 2025, Algorithm 1 lines 11-12, corrected).
        self._scale = 1.0 if self.lat is None else math.ldexp(1.0, self.lattice.value_bits)
        self._Q = np.zeros((H, 4, SA))
        self._Q[:, 2:] = H * self._scale
        self._Q_spare = self._Q.copy()                        # rows 0 and 3 stay 0 and H in both
        # (V-check_h, V-hat_h)(s) for h = 0..H, scaled (H + 1, 2, S); row H is V_{H+1} = 0
        self._Vs = np.zeros((H + 1, 2, S))
        self._Vs[:H, 1] = H * self._scale
        self._logdet_last: np.ndarray | None = None
        self._phi_t = np.ascontiguousarray(self.phi_flat.T)   # (d, S*A)
        self._beta_opt = constants.beta_bern if constants.optimistic == "bernstein" else constants.beta_hoef
        self._cur: dict | None = None
        # buffers of the backward pass: coefficient rows [b_s' (S); noise V-check; noise V-hat] (H, S + 2, d),
        # their products with Lambda^-1 phi^T plus the public parts (H, S + 2, S*A), the indices x (H, 2, S*A)
        self._coef = np.zeros((H, S + 2, self.d))
        self._pb_aug = np.empty((H, S + 2, SA))
        self._x = np.empty((H, 2, SA))
        # ||phi||_{Lambda^-1}, ||Lambda^-1 phi||_2 (per release) and the reward r (fixed), scaled by _scale
        self._norms = np.zeros((H, 3, SA))
        self._norms[:, 2] = self._scale * self.r_flat
        self._noise_bonus = constants.noise_z > 0 and constants.noise_v > 0
        z = constants.noise_z * constants.noise_v if self._noise_bonus else 0.0
        # public parts (pessimistic, optimistic) = coefficients of the three rows of _norms
        self._bonus_coef = np.array([[-constants.beta_hoef * self._scale, -z * self._scale, 1.0],
                                     [self._beta_opt * self._scale, z * self._scale, 1.0]])

    @property
    def Qhat(self) -> np.ndarray:
        """Optimistic Q-hat_h(s, a), shape (H, S*A) (a copy)."""
        return self._Q[:, 2] / self._scale

    @property
    def V(self) -> np.ndarray:
        """(V-hat_h, V-check_h)(s) for h = 0..H, shape (H + 1, 2, S) (a copy; row H is V_{H+1} = 0)."""
        return self._Vs[:, ::-1] / self._scale

    @property
    def Qchk(self) -> np.ndarray:
        """Pessimistic Q-check_h(s, a), shape (H, S*A) (a copy)."""
        return self._Q[:, 1] / self._scale

    # -- releases ---------------------------------------------------------
    def _release_gram(self) -> tuple[np.ndarray, np.ndarray]:
        """(inverse, logdet) of this episode's Gram matrices, shapes (H, d, d), (H,).

        Non-private: the exact Sherman-Morrison state. Private: the integer
        lattice statistic plus one fresh exact GOE per h (non-cumulative),
        in real units, plus the public (lambda + 2 lambda-tilde) I, eigenvalues
        floored (post-processing); rho = inf: the exact matrix, floored.
        """
        if not self.private:
            return self.stats.inv, self.stats.logdet
        if self.lat is None:
            return self._inverse(self.stats.gram)
        bits = self.lattice.gram_bits
        noisy = self.lat.gram + self.noise.goe("gram", self.c.noise_gram, bits, self.H, self.d)
        # exactly symmetric: integer statistic and noise, a power-of-two scale, a diagonal public part
        return self._inverse(release(noisy, bits) + self._public, symmetric=True)

    def _vec_noise(self) -> np.ndarray | None:
        """Fresh phi_1, phi_2, phi_3 for every step of this episode, int64 (H, 3, d) in lattice units.

        One independent draw per (k, h) and statistic, 3H per episode (the
        noise does not depend on the data, so drawing the H steps together is
        the same mechanism as drawing each just before its release). None
        without noise.
        """
        if self.lat is None:
            return None
        lat, c, H, d = self.lattice, self.c, self.H, self.d
        return np.stack([self.noise.vector("v-hat", c.noise_v, lat.target_bits, H, d),
                         self.noise.vector("v-check", c.noise_v, lat.target_bits, H, d),
                         self.noise.vector("v-squared", c.noise_v2, lat.square_target_bits, H, d)], axis=1)

    def _targets(self, h, vals: np.ndarray, noise) -> np.ndarray:
        """Released targets of step(s) ``h``: sum w phi (V, V-check, V^2)(s') + noise, real units (.., 3, d).

        ``vals`` (.., 3, S) holds V-hat_{h+1}, V-check_{h+1} (clipped to [0, H])
        and V-hat_{h+1}^2 in real units (the auditor's gray-box view,
        ``privaudit.audit.online.jdp``); the agent itself uses :meth:`_targets_now`,
        the same numbers from its scaled state.
        """
        if self.lat is None:
            return vals @ self.stats.b[h]
        q = np.rint(vals * self._unit_in).astype(np.int64)
        return (q @ self.lat.b[h] + noise) * self._unit_out

    def _targets_now(self, noise) -> np.ndarray:
        """Released targets of every step: sum w phi (V, V-check, V^2)(s') + noise, real units (H, 3, d).

        The values are V-hat_{h+1}, V-check_{h+1} (clipped to [0, H]) and
        V-hat_{h+1}^2 of the current Q. Lattice: the V's rounded to the nearest
        2^-VB, V^2 to the nearest 2^-SB, integer sums, integer noise, then real
        units (``_unit_out`` and the scalings are powers of two: exact).
        """
        vs = self._Vs[1:]                                          # (H, 2, S): V-check, V-hat, scaled
        if self.lat is None:
            return np.stack([vs[:, 1], vs[:, 0], vs[:, 1] * vs[:, 1]], axis=1) @ self.stats.b
        lat = self.lattice
        q = np.empty((self.H, 3, self.S))
        np.rint(vs[:, 1], out=q[:, 0])                             # V-hat on 2^-VB (already scaled by 2^VB)
        np.rint(vs[:, 0], out=q[:, 1])
        np.multiply(vs[:, 1], vs[:, 1], out=q[:, 2])               # V^2 2^(2 VB) -> V^2 2^SB, exact
        np.rint(np.ldexp(q[:, 2], lat.square_bits - 2 * lat.value_bits, out=q[:, 2]), out=q[:, 2])
        return (q.astype(np.int64) @ self.lat.b + noise) * self._unit_out

    # -- episode ----------------------------------------------------------
    def _prepare(self) -> np.ndarray:
        """Release, decide the switch, run the backward pass; greedy actions (H, S)."""
        inv, logdet = self._release_gram()
        if self._logdet_last is None:
            self._logdet_last = logdet.copy()
            switch = False
        else:
            switch = bool((logdet - self._logdet_last >= _LOG2 + self.c.switch_margin).any())
        noise = self._vec_noise()
        if switch:
            self._backward(inv, noise)
            self._logdet_last = logdet.copy()
            self.n_switches += 1
        # the 3H target releases with this episode's V_{h+1} (after a switch: the new ones)
        w = self._targets_now(noise) @ inv                             # (H, 3, d); inv is symmetric
        self._cur = {"inv": inv, "w": w}                          # w[:, 0..2]: w-hat, w-check, w-bar
        return self.pi

    def _backward(self, inv: np.ndarray, noise) -> None:
        """Q-hat, Q-check, V for h = H-1..0 from the released inverses and this episode's target noise.

        Q-hat / Q-check at every (s, a) are linear in V_{h+1}: with M_h = Lambda_h^-1 phi^T (d, S*A),
        x_h = y_h^T M_h, y_h = b_h^T V_{h+1} (+ noise), so x_h = V_{h+1}^T (b_h M_h) + noise_h^T M_h.
        b_h M_h, noise_h^T M_h and the bonuses for all h are formed first, in batched products
        (post-processing; the releases themselves are formed in :meth:`_targets_now`); each step is then
        one (2, S + 2) @ (S + 2, S*A) product, one clip (the monotone update and [0, H]), one max over
        the actions and one rint (V on the lattice grid), in units of 2^-VB (``_scale``).
        """
        H, S, A, c, sc = self.H, self.S, self.A, self.c, self._scale
        mT = inv @ self._phi_t                                     # (H, d, S*A); inv is symmetric
        norms = self._norms                                        # ||phi||_{Lambda^-1}, ||Lambda^-1 phi||_2
        bon = np.einsum("hds,ds->hs", mT, self._phi_t, out=norms[:, 0])
        np.sqrt(np.maximum(bon, 0.0, out=bon), out=bon)
        pb = self._pb_aug                                          # rows: b_s' M (S), V-check, V-hat parts
        if self.lat is None:
            np.matmul(self.stats.b, mT, out=pb[:, :S])
            pb[:, S:] = 0.0
        else:
            coef, lat = self._coef, self.lattice                   # real units x _scale (powers of two)
            np.ldexp(self.lat.b, -(lat.feature_bits + lat.weight_bits), out=coef[:, :S])
            np.multiply(noise[:, 1], self._unit_out[1, 0] * sc, out=coef[:, S])
            np.multiply(noise[:, 0], self._unit_out[0, 0] * sc, out=coef[:, S + 1])
            np.matmul(coef, mT, out=pb)
        if self._noise_bonus:
            # z sd of the target noise's part of w^T phi: eta^T Lambda^-1 phi, eta ~ N(0, noise_v^2 I),
            # has sd noise_v ||Lambda^-1 phi||_2 given the released Lambda (post-processing)
            np.sqrt(np.einsum("hds,hds->hs", mT, mT, out=norms[:, 1]), out=norms[:, 1])
        # public parts, scaled: (r - beta-hoef ||phi|| - z noise_v ||M phi||, r + beta-opt ||phi|| + z noise_v ||M phi||)
        pb[:, S:] += np.matmul(self._bonus_coef, norms)
        v_aug = np.zeros((2, S + 2))                               # [V-check_{h+1}, 1, 0; V-hat_{h+1}, 0, 1]
        v_aug[0, S], v_aug[1, S + 1] = 1.0, 1.0
        vg = v_aug[:, :S]                                          # view: V_{h+1} on the grid
        # the new Q goes to the spare buffer (no overlap of the clip's output with its bounds), then the
        # two swap roles
        x, Q, Qn, Vs = self._x, self._Q, self._Q_spare, self._Vs
        upper = float(H) * sc
        clip = np.clip if not c.monotone else None
        for h in range(H - 1, -1, -1):                             # sequential in h: V_h needs V_{h+1}
            if self.lat is None:
                vg[...] = Vs[h + 1]
            else:
                np.rint(Vs[h + 1], out=vg)
            xh = np.dot(v_aug, pb[h], out=x[h])
            qh, new = Q[h], Qn[h, 1:3]
            # monotone (Algorithm 1 lines 11-12): Q-check = clip(new, Q-check_old, H), Q-hat = clip(new, 0, Q-hat_old);
            # otherwise the new estimate clipped to [0, H]
            if clip is None:
                _CLIP(xh, qh[1::-1], qh[3:1:-1], out=new)
            else:
                clip(xh, 0.0, upper, out=new)
            np.maximum.reduce(new.reshape(2, S, A), axis=2, out=Vs[h])
        self._Q, self._Q_spare = Qn, Q
        Q = Qn
        qhat = Q[:, 2] if sc == 1.0 else Q[:, 2] / sc
        index = x[:, 1] if sc == 1.0 else x[:, 1] / sc
        self.pi = greedy(qhat.reshape(H, S, A), index.reshape(H, S, A))

    def weights(self, phi_traj: np.ndarray) -> np.ndarray:
        """sigma-bar_{k,h}^{-2} at the visited (s_h, a_h), shape (H,), from this episode's releases.

        Parameters
        ----------
        phi_traj : ndarray, shape (H, d)
            phi(s_h^k, a_h^k) (the current user's own data).
        """
        cur, c, H = self._cur, self.c, self.H
        p = phi_traj[:, :, None]                                       # (H, d, 1)
        nphi = np.sqrt(np.maximum((cur["inv"] @ p * p).sum(axis=(1, 2)), 0.0))
        xh, xc, xb = (cur["w"] @ p)[:, :, 0].T                          # w-hat, w-check, w-bar . phi, (H,) each
        vbar = _CLIP(xb, 0.0, H ** 2) - _CLIP(xh, 0.0, H) ** 2
        e = np.minimum(c.beta_var * nphi, H ** 2) + np.minimum(2 * H * c.beta_hoef * nphi, H ** 2)
        dd = np.minimum(c.d_coef * (xh - xc + 2 * c.beta_hoef * nphi), c.d_cap)
        sigma = np.sqrt(np.maximum(vbar + e + dd + H, 0.0))
        sbar = np.maximum(np.maximum(sigma, c.sigma_min), c.floor_coef * np.sqrt(nphi))
        return 1.0 / sbar ** 2

    def update(self, states, actions, rewards) -> None:
        """Feed one episode: compute its weights, add it to the statistics."""
        s, a, r = self._check_traj(states, actions, rewards)
        if self._cur is None:
            raise UsageError("call policy() before update() in every episode.")
        phi_traj = self.phi[s[:-1], a]
        if self.lat is None:
            self.stats.add(phi_traj, s[1:], r, self.weights(phi_traj))
        else:
            self.lat.add(self.phi_q[s[:-1], a], s[1:], None, self.weights(phi_traj))
        self._cur = None
        self.k += 1

    def events(self) -> list[PrivacyEvent]:
        """4HK releases at rho/(4HK): Gram (GOE), V, V-check, V^2 targets (fresh per (k, h))."""
        if not self.private or self.c.noise_gram == 0:
            return []
        n, w, H = self.H * self.K, self.c.w_max, self.H
        return [goe_event("dp-lsvi-ucb-pp:gram", n, w, self.c.noise_gram),
                vector_event("dp-lsvi-ucb-pp:v-hat", n, H, w, self.c.noise_v),
                vector_event("dp-lsvi-ucb-pp:v-check", n, H, w, self.c.noise_v),
                vector_event("dp-lsvi-ucb-pp:v-squared", n, H ** 2, w, self.c.noise_v2)]


__all__ = ["LSVIUCBPlusPlus", "PRIVACY_UNIT"]
