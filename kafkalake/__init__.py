"""kafkalake: cool Kafka topics down into a queryable S3 data lake."""
