"""The book's Sphinx extensions, named in ``_config.yml`` (``sphinx.extra_extensions``)."""
