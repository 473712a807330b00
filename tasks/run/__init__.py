"""The run on disk: where its files live, its typed records and their JSON, the resume markers,
the summary row, the results store and the test-only fault points.

Prefect-free, and free of torch, Lightning, MLflow and DVC, so that whatever reads a run (the
flows, ``tabula status``, the benchmarks) loads none of them to do it.
"""
