"""The pack pipeline after the scan: plan (pure), the workers (joblib), OUT's state and journal,
the merge into index.json, TFDS metadata, and the Dask cluster."""
