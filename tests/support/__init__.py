"""What the tests share: the worlds the integration tests apply to a moto server (``ec2_deployment``,
``sagemaker``; their fixtures are in tests/integration/conftest.py) and the one way to run the CLI (``cli``)."""
