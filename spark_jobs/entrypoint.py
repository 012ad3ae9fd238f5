"""EMR Serverless / spark-submit entry point: ``entrypoint.py archive --env staging --topic a --topic b``.

The jobs and the core package arrive as ``--py-files kafkalake_jobs.zip``; endpoints come from
``KAFKALAKE_*`` variables set in the job's Spark configuration.
"""

import sys

from spark_jobs import archiver, compactor

JOBS = {"archive": archiver.main, "compact": compactor.main}

if __name__ == "__main__":
    JOBS[sys.argv[1]](sys.argv[2:])
