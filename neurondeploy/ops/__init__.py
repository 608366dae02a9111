"""Every workflow a user starts, as a library call: ``apply`` (cloud and local), ``train``, ``compile_remote``,
``logs``. Each reports through callbacks (events out, no printing); the CLI only parses for them and renders."""
