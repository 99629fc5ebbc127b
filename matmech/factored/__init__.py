"""Factored releases: marginal tables → measure → reconstruct → answers, never the full
histogram (issue 14; residual bases of Xiao et al., NeurIPS 2023)."""

__all__ = []
