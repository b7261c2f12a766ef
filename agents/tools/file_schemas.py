"""What the model is told about the file tools (agents/tools/file_tools.py): Letta's
descriptions and parameter schemas, word for word where Letta's clients check them (a nested
request object and multi-line argument notes, which a docstring cannot carry)."""

from __future__ import annotations

from typing import Any

from agents.tools.registry import ToolRegistry

OPEN_FILES = """Open one or more files and load their contents into files section in core memory. \
Maximum of 5 files can be opened simultaneously.

Use this when you want to:
- Inspect or reference file contents during reasoning
- View specific portions of large files (e.g. functions or definitions)
- Replace currently open files with a new set for focused context (via `close_all_others=True`)

Examples:
  Open one file of a directory named `project_utils` (entire content):
    file_requests = [FileOpenRequest(file_name="project_utils/config.py")]

  Open several files with different view ranges:
    file_requests = [
      FileOpenRequest(file_name="project_utils/config.py", offset=0, length=50),  # Lines 1-50
      FileOpenRequest(file_name="project_utils/main.py", offset=100, length=100),  # Lines 101-200
      FileOpenRequest(file_name="project_utils/utils.py"),  # Entire file
    ]

  Close all other files and open new ones:
    open_files(file_requests, close_all_others=True)

Returns:
    str: A status message naming the files opened (and any closed to make room)."""

GREP_FILES = """Searches file contents for pattern matches with surrounding context.

Results are paginated - shows 20 matches per call. The response includes:
- A summary of total matches and which files contain them
- The current page of matches (20 at a time)
- Instructions for viewing more matches using the offset parameter

Example usage:
    First call: grep_files(pattern="TODO")
    Next call: grep_files(pattern="TODO", offset=20)  # Shows matches 21-40

Returns search results containing:
- Summary with total match count and file distribution
- List of files with match counts per file
- Current page of matches (up to 20)
- Navigation hint for next page if more matches exist"""

SEMANTIC_SEARCH_FILES = """Searches file contents using semantic meaning rather than exact \
matches.

Ideal for:
- Finding conceptually related information across files
- Discovering relevant content without knowing exact keywords
- Locating files with similar topics or themes

Returns:
    str: The best matching passages, each with its file and where in it."""


def _int(description: str) -> dict[str, Any]:
    return {"type": "integer", "description": description}


def _str(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


PARAMETERS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    "open_files": (
        OPEN_FILES,
        {
            "file_requests": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "file_name": _str("Name of the file to open"),
                        "offset": _int(
                            "Optional offset for starting line number (0-indexed). If not "
                            "specified, starts from beginning of file."
                        ),
                        "length": _int(
                            "Optional number of lines to view from offset (inclusive). If not "
                            "specified, views to end of file."
                        ),
                    },
                    "required": ["file_name"],
                },
                "description": "List of file open requests, each specifying file name and "
                "optional view range.",
            },
            "close_all_others": {
                "type": "boolean",
                "description": "If True, closes all other currently open files first. "
                "Defaults to False.",
            },
        },
        ["file_requests"],
    ),
    "grep_files": (
        GREP_FILES,
        {
            "pattern": _str("Keyword or regex pattern to search within file contents."),
            "include": _str(
                "Optional keyword or regex pattern to filter filenames to include in the search."
            ),
            "context_lines": _int(
                "Number of lines of context to show before and after each match.\n"
                "Equivalent to `-C` in grep_files. Defaults to 1."
            ),
            "offset": _int(
                "Number of matches to skip before showing results. Used for pagination.\n"
                "For example, offset=20 shows matches starting from the 21st match.\n"
                "Use offset=0 (or omit) for first page, offset=20 for second page,\n"
                "offset=40 for third page, etc. The tool will tell you the exact\n"
                "offset to use for the next page."
            ),
        },
        ["pattern"],
    ),
    "semantic_search_files": (
        SEMANTIC_SEARCH_FILES,
        {
            "query": _str("The search query text to find semantically similar content."),
            "limit": _int("Maximum number of results to return (default: 5)"),
        },
        ["query"],
    ),
}


def describe(registry: ToolRegistry) -> None:
    """Give the registered file tools Letta's descriptions and schemas."""
    for name, (description, properties, required) in PARAMETERS.items():
        tool = registry.get(name)
        assert tool is not None, name
        tool.description = description
        tool.parameters = {"type": "object", "properties": properties, "required": required}
