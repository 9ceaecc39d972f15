"""Loopback fakes of remote services, reached by the real client libraries."""
