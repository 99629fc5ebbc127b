"""What a release returns: :class:`~matmech.results.release.Release`, the streamed
:class:`~matmech.results.store.MarginalRelease` with its spill store, answer labels."""
