"""PySpark jobs: the archiver and the compactor. Each main() = read, transform, write."""
