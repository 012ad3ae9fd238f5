"""The archiver job: Kafka topics to Parquet objects in the S3 layout, exactly once.

One topic through a run, in reading order:

- ``job``: the fleet job (``main``); every topic of the environment, several at once, each isolated; logs and publishes
  the results (``metrics``).
- ``topic_run``: one topic: ``catch_up`` → ``TopicArchiver.run_plan`` (stored plan → ``carry_out`` → receipt →
  offset commit → plan deleted).
- ``light``: light topics' plans (``LIGHT_PLAN_RECORDS``) carried out together, one Spark job per round, each
  committed by its own topic.
- ``plan`` (the durable plan of offset ranges) and ``offsets`` (watermarks and the consumer group's commits).
- ``records`` (the plan's Kafka read, classified, decoded, timed, personal fields protected; pure column transforms
  in ``transform`` and ``pseudonyms``) →
  ``writer`` (the executors' deterministic objects) → ``summary`` (the outcome accounted, the receipt made).
"""
