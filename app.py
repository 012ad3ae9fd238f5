#!/usr/bin/env python3
"""CDK entry point (`npx cdk synth -c env=staging`); the app itself lives in infra/app.py."""

from infra.app import main

main()
