"""EMR Serverless / spark-submit entry point: ``entrypoint.py archive --env staging --catalog catalog --topic a``.

The jobs and the core package arrive as ``--py-files kafkalake_jobs.zip``; endpoints come from
``KAFKALAKE_*`` variables set in the job's Spark configuration (``kafkalake.jobspec``).
"""

import sys

from kafkalake.jobspec import Job
from spark_jobs.archiver import job as archiver
from spark_jobs.compaction import job as compaction
from spark_jobs.erasure import job as erasure

JOBS = {Job.ARCHIVE: archiver.main, Job.COMPACT: compaction.main, Job.ERASE: erasure.main}

if __name__ == "__main__":
    JOBS[Job(sys.argv[1])](sys.argv[2:])
