pytest_plugins = ["specverify.pytest_plugin"]
