"""PySpark's worker daemon (``spark.python.daemon.module``) with the principal hooks installed
(``kafkalake_dev.local.principals``): the workers it forks tag their AWS calls with their task's principal."""

from pyspark import daemon

from kafkalake_dev.local.principals import install

if __name__ == "__main__":
    install(worker=True)
    daemon.manager()  # type: ignore[no-untyped-call]
