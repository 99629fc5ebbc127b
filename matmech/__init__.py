"""matmech: the Matrix Mechanism for linear query workloads under differential privacy."""
