"""Reporting: the failure analysis of per-query results, and the report (one schema, written by the command and the
Space).
"""
