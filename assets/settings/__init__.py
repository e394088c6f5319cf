"""What a run is configured by: the language registry (``assets/languages.toml`` or
``$PSP_LANGUAGES``), the profiles, the resources, each stage's run config, and the language
partitions."""
