"""SLO capacity: the search over a load, apart from any server, and its measurement on a running one."""
