"""The metastore maintainer: keeps the Glue Data Catalog in step with the data on S3."""
