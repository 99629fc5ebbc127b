"""Choosing a strategy: the fixed candidate family, the ranking record, its scores and
its table printer (:mod:`~matmech.advisor.compare`), the ranked advice over every family
(:mod:`~matmech.advisor.advise`) and the release's strategy choice
(:mod:`~matmech.advisor.choice`). Data-independent.
"""
