"""Reporting: timeline/request DataFrames, metrics, Chrome traces, plots, comparison tables.

Submodules (import them directly; this package imports nothing heavy on its own):
:mod:`frames`, :mod:`intervals`, :mod:`metrics`, :mod:`window`, :mod:`perfetto`,
:mod:`plots`, :mod:`compare`.
"""
