"""tasks: one side effect each (files, MLflow, DVC), thin wrappers over the pure core."""
