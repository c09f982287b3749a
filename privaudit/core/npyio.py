"""Reading NumPy files safely: why ``np.load(..., allow_pickle=False)`` refused a file, in a user's words."""

from __future__ import annotations


def numpy_load_reason(err: Exception) -> str:
    """Why ``np.load(path, allow_pickle=False)`` failed, in a user's words.

    numpy reports a file without a NumPy header or zip signature as "pickled
    (object) data" and suggests loading it unsafely; privaudit never unpickles
    a file, so the reason given is that the file is not NumPy's format.
    """
    if isinstance(err, IsADirectoryError):
        return "it is a folder, not a file"
    if isinstance(err, OSError) and err.strerror:  # "[Errno 13] Permission denied: 'x'" -> "Permission denied"
        return err.strerror
    msg = str(err)
    if msg.startswith("Object arrays cannot be loaded"):  # a real .npy header, dtype object
        return "a NumPy array of Python objects (dtype object: pickled data, never loaded); save numbers"
    if "pickle" in msg:
        return "not a NumPy .npy/.npz file (no NumPy header or zip signature; pickled files are never loaded)"
    return msg
