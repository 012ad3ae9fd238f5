"""The permission check: every AWS call the pipeline's roles make in the stack tests, evaluated against what the
synthesized templates deploy (identity policies, the bucket policy, KMS key policies, secrets' resource policies,
Lake Formation grants and tags). ``requests`` is the vocabulary the recording, the mapping and the evaluators share."""
