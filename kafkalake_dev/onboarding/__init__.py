"""``kafkalake catalog import``: catalog entries proposed from what a cluster holds (``importer``), with the business
time and schema inferred from sampled records (``infer``)."""
