"""Off-policy evaluation from logs with DP: the value of any tabular policy, with a proven lower bound."""
