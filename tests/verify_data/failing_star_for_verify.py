# Imported with `*` by star_import_fails.py: it fails, so the names it should bind are never known.
raise ImportError("a dependency of the star-imported module is missing")
