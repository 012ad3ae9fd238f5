"""The local stand-in for AWS: the stack (Kafka, registry, moto server), its defaults and endpoints, provisioning,
local Spark and Trino, the job runner, the sandboxes and workloads the tests and the demo use."""
