"""Ready tools of the 0.1.x classic API: ``python``, ``calculator``, ``search``, ``search_ddg`` and ``ask``.

Environments written for the classic 0.1.x library import them (``from verifiers.utils.tools import
python``) and hand them to a ``ToolEnv``. They take the same arguments and answer in the same form
(a string; an ``"Error: ..."`` string when they cannot), with three differences that keep model-written
input where it belongs:

* ``python`` runs the model's code in the local sandbox (``verifiers.sandbox``, bubblewrap by
  default), never as a process of the host;
* ``calculator`` evaluates the expression by walking its syntax tree, with no ``eval`` and a bound on
  powers, so an expression like ``9**9**9**9`` is an error instead of a hung worker;
* ``ask`` fetches only public ``http(s)`` addresses (no loopback, private or link-local host), each
  connection made to the very address that was checked, redirects checked hop by hop.

``search`` (Brave, ``brave-search``), ``search_ddg`` (``duckduckgo-search``) and ``ask`` (``markdownify``,
``openai``, and ``DEEPINFRA_API_KEY`` for the model that reads the page) need those
packages and the network; without them they answer with an error string that names what is missing.
"""

from __future__ import annotations

import ast
import ipaddress
import operator
import os
import socket
import textwrap
from typing import Any
from urllib.parse import urlsplit

__all__ = ["ask", "calculator", "python", "search", "search_ddg"]

PYTHON_TIMEOUT_S = 10
OUTPUT_CHARS = 1000


def _notebook_cell(src: str) -> str:
    """``src`` made to print its last expression's value (when not None), as a notebook cell shows it."""
    src = textwrap.dedent(src)
    tree = ast.parse(src, mode="exec")
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return src
    last = tree.body.pop()
    head = ast.unparse(ast.Module(body=tree.body, type_ignores=[]))
    return f"{head}\n_ = {ast.unparse(last.value)}\nif _ is not None: print(_)"


def python(code: str) -> str:
    """Run a block of Python code as a notebook cell and return what it printed (and the value of its
    last expression), or its error output.

    Args:
        code (str): The Python code to run

    Returns:
        The printed output, or the error message

    Examples:
        {"code": "x = 5\\ny = 10\\nx + y"} -> "15"
        {"code": "print(sum(range(4)))"} -> "6"
    """
    from verifiers.sandbox import Sandbox

    program = _notebook_cell(code)  # code that does not parse raises here: the tool's error, as in 0.1.x
    result = Sandbox().run_sync(python=program, timeout=PYTHON_TIMEOUT_S)
    if result.killed and result.kill_reason == "timeout":
        return f"Error: Code execution timed out after {PYTHON_TIMEOUT_S} seconds"
    error = result.stderr.strip()[:OUTPUT_CHARS]
    return error if error else result.stdout.strip()[:OUTPUT_CHARS]


_ALLOWED = set("0123456789+-*/.() ")
_BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow,
}  # fmt: skip
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_MAX_RESULT_BITS = 1 << 16


def _power(base: Any, exponent: Any) -> Any:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        if exponent * max(abs(base).bit_length(), 1) > _MAX_RESULT_BITS:
            raise OverflowError("the result would be too large")
    return operator.pow(base, exponent)


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        if isinstance(node.op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
            if left.bit_length() + right.bit_length() > _MAX_RESULT_BITS:
                raise OverflowError("the result would be too large")
        return _BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    raise SyntaxError("only numbers and + - * / ** ( ) are allowed")


def calculator(expression: str) -> str:
    """Evaluate one arithmetic expression of numbers and the operators + - * / ** and parentheses.

    Args:
        expression (str): The arithmetic expression, e.g. "3 * (17 + 4)"

    Returns:
        The result, or an error message

    Examples:
        "2 + 2" -> "4"
        "100 / 8" -> "12.5"
    """
    if not all(c in _ALLOWED for c in expression):
        return "Error: Invalid characters in expression"
    try:
        tree = compile(expression, "<string>", "eval", ast.PyCF_ONLY_AST)
        return str(_evaluate(tree))
    except Exception as e:  # the message the model reads, as the 0.1.x tool wrote it
        return f"Error: {e}"


def search_ddg(query: str, num_results: int = 5) -> str:
    """Search DuckDuckGo and return the titles and short summaries of the top results.

    Args:
        query (str): What to search for
        num_results (int): How many results to return (default 5, at most 10)

    Returns:
        One bullet per result: its title and a short summary
    """
    try:
        from duckduckgo_search import DDGS  # type: ignore[import-not-found]

        with DDGS() as ddgs:
            found = list(ddgs.text(query, max_results=min(num_results, 10)))
        if not found:
            return "No results found"
        lines = []
        for r in found:
            snippet = r["body"][:200].rsplit(".", 1)[0] + "."
            lines.append(f"\u2022 {r['title']}\n  {snippet}")
        return "\n\n".join(lines)
    except Exception as e:
        return f"Error: {e}"


def search(query: str) -> str:
    """Search the web (Brave) and return the top three results.

    Args:
        query: What to search for

    Returns:
        One bullet per result: its source, title, a short summary and its address
    """
    try:
        from brave import Brave  # type: ignore[import-not-found]

        results = Brave().search(q=query, count=10, raw=True)
        web = (results or {}).get("web", {}).get("results", [])
        if not web:
            return "No results found"
        lines = []
        for r in web:
            if "profile" not in r:
                continue
            header = f"{r['profile']['name']} ({r['profile']['long_name']})"
            lines.append(f"\u2022  {header}\n   {r['title']}\n   {r['description'][:300]} ...\n   {r['url']}")
        return "\n\n".join(lines[:3])
    except Exception as e:
        return f"Error: {e}"


_PAGE_BYTES = 5 << 20


def _public_address(url: str) -> tuple[str, str] | str:
    """``(host, address)`` to read ``url`` from: its host resolved once, every address public; or
    why it may not be read (only http(s) to public addresses)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "only http and https addresses can be read"
    try:
        infos = socket.getaddrinfo(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM)
    except OSError as e:
        return f"cannot resolve {parts.hostname}: {e}"
    addresses = [info[4][0] for info in infos]
    for address in addresses:
        if not ipaddress.ip_address(address.split("%", 1)[0]).is_global:
            return f"{parts.hostname} is not a public address"
    return parts.hostname, addresses[0]


def _fetch(url: str) -> tuple[int, dict[str, str], bytes]:
    """One GET of ``url`` connected to the address that was checked (a second lookup, which a
    rebinding name could answer with a private address, never happens); no redirect followed."""
    import http.client
    import ssl

    found = _public_address(url)
    if isinstance(found, str):
        raise ValueError(found)
    host, address = found
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)

    class Pinned(http.client.HTTPConnection):
        def connect(self) -> None:
            self.sock = socket.create_connection((address, port), self.timeout)

    class PinnedTLS(http.client.HTTPSConnection):
        def connect(self) -> None:
            raw = socket.create_connection((address, port), self.timeout)
            self.sock = ssl.create_default_context().wrap_socket(raw, server_hostname=host)

    conn = (PinnedTLS if parts.scheme == "https" else Pinned)(host, port, timeout=30)
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        conn.request("GET", path, headers={"User-Agent": "verifiers-tools/ask", "Accept": "text/html,*/*"})
        response = conn.getresponse()
        body = response.read(_PAGE_BYTES)
        return response.status, {k.lower(): v for k, v in response.getheaders()}, body
    finally:
        conn.close()


def _page_markdown(url: str) -> str:
    try:
        from markdownify import markdownify  # type: ignore[import-not-found]

        for _hop in range(6):  # redirects followed by hand: each address is checked before it is read
            status, headers, body = _fetch(url)
            if status in (301, 302, 303, 307, 308) and headers.get("location"):
                from urllib.parse import urljoin

                url = urljoin(url, headers["location"])
                continue
            if status >= 400:
                return f"Error: {status} for url: {url}"
            charset = "utf-8"
            for part in headers.get("content-type", "").split(";"):
                if part.strip().lower().startswith("charset="):
                    charset = part.split("=", 1)[1].strip() or charset
            try:
                text = body.decode(charset, errors="replace")
            except LookupError:
                text = body.decode("utf-8", errors="replace")
            return markdownify(text)
        return "Error: too many redirects"
    except Exception as e:
        return f"Error: {e}"


def ask(question: str, url: str) -> str:
    """Answer a question about a web page (one from the search results), read by a language model.

    Args:
        question: The question about the page
        url: The address of the page

    Returns:
        The model's answer, drawn from the page's contents
    """
    contents = _page_markdown(url)[:50000]
    if contents.startswith("Error:"):
        return "Error: Failed to fetch URL contents."
    prompt = (
        "Answer the question below from the web page's contents.\n\n"
        f"Question: {question}\n\nPage: {url}\n\nContents:\n{contents}\n"
    )
    try:
        from openai import OpenAI

        client = OpenAI(base_url="https://api.deepinfra.com/v1/openai", api_key=os.getenv("DEEPINFRA_API_KEY"))
        reply = client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct", messages=[{"role": "user", "content": prompt}], max_tokens=4000,
        )
        return reply.choices[0].message.content or "Error: No response from model."
    except Exception as e:
        return f"Error: {e}"
