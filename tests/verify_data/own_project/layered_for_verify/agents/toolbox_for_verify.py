# A sibling module with the name of the project's top-level package: run from the project's root, the
# package wins, since Python never looks for top-level modules inside a package's folder.
raise ImportError("the sibling module was imported instead of the project's package")
