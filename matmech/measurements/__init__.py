"""Calibrated measurements of marginal tables and their exact secure draws (the residual
basis, generalised marginals, weighted tables), and the frozen record of every noisy
measurement a release makes."""
