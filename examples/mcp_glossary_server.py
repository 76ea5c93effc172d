"""A tiny MCP server (official SDK) for examples/mcp_glossary.yaml: stdio, or HTTP with a port.

python examples/mcp_glossary_server.py stdio
python examples/mcp_glossary_server.py http 8765     # http://127.0.0.1:8765/mcp
"""

import sys

from mcp.server.mcpserver import MCPServer

server = MCPServer("glossary")
GLOSSARY = {"clearance": "what one task may see", "manifest": "where each prompt part came from"}


@server.tool()
def lookup(term: str) -> str:
    """Look a term up in the project glossary."""
    return GLOSSARY.get(term.lower(), f"no entry for {term!r}")


@server.tool()
def delete_glossary() -> str:
    """Not in any agent's allow-list: never offered to a model, never called."""
    return "deleted"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
