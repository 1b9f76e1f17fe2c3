"""MCP: other programs' tools in tether's runs, over the official `mcp` SDK (the ``mcp`` extra). `servers`
says what a server is (pure: no SDK import), `stdio` starts one as a watched process, `connection` holds
one server (start, calls, failures, restarts), `tools` makes its tools tether tools and their results text,
`manager` holds the servers of a process. Importing this package imports nothing of the SDK; its modules
other than `servers` do."""
