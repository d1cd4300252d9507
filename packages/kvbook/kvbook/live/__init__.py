"""The in-browser runtime's assembly: Pyodide vendored and checked, each page's figure code, the worker."""
