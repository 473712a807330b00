"""The torch layer: the dual-head ResNet, batched inference, training, and the shard schema.

Modules (import them directly; this package imports nothing at import time):

- ``model.network``: ``PolicyValueNet``, ``make_network``, checkpoints, ``weights_sha256``;
- ``model.evaluator``: ``Evaluator`` (batched, random symmetries) and ``UniformEvaluator``;
- ``model.shards``: THE on-disk self-play schema (Parquet, ``SCHEMA_VERSION``);
- ``model.system`` / ``model.datamodule``: the LightningModule and the training data.
"""
