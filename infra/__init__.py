"""The CDK app: one stack per environment, from environments.yaml and the topic catalog."""
