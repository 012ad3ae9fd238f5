"""``python -m infra.fetch`` (``make fetch``): download once into the cache what synth and local Spark read there
(the connector and S3A jars, the jobs' Python environment)."""

from infra.assets import fetch

if __name__ == "__main__":
    fetch()
