"""The ``kafkalake`` command line: the app and its command groups (``app``), the options they share (``options``) and
what they print (``render``). The top room of the dev tooling: nothing else in it imports the CLI."""
