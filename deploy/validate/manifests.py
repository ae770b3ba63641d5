"""manifests.py - reads the YAML files of psflow's deployment (Kubernetes manifests, the
output of `kubectl kustomize` and of `docker-compose config`) into Python objects for the
tests, with or without PyYAML.

    from manifests import load_documents
    docs = load_documents("deploy/kubernetes/tfjob/tfjob.yaml")   # list of dicts

PyYAML is used when it is installed. Otherwise a reader for the subset these files use:
block mappings and sequences, plain, single- and double-quoted scalars, JSON-style flow
collections and `|` literal blocks (no anchors, tags or multi-line plain scalars). Where
PyYAML exists both run and must agree, so the subset reader is checked wherever it can be.
"""
import json
import re


def parse_scalar(text):
    """A scalar or flow collection written on one line."""
    text = text.strip()
    if text == "" or text in ("~", "null", "Null", "NULL"):
        return None
    if text[0] in "[{" or text[0] == '"':
        return json.loads(text)  # flow collections and double quotes: JSON-compatible here
    if text[0] == "'":
        return text[1:-1].replace("''", "'")
    if text in ("true", "True", "TRUE"):
        return True
    if text in ("false", "False", "FALSE"):
        return False
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]*\.[0-9]+|[0-9]+\.)([eE][-+]?[0-9]+)?", text):
        return float(text)
    return text


def strip_comment(line):
    """Removes a trailing comment outside quotes."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def mini_yaml_documents(text):
    """The documents of `text` read by the subset reader."""
    docs, cur = [], []
    for raw in text.split("\n"):
        if raw.strip() == "---":
            docs.append(cur)
            cur = []
        else:
            cur.append(raw)
    docs.append(cur)
    out = []
    for lines in docs:
        p = Parser(lines)
        value = p.block(0)
        if value is not None:
            out.append(value)
    return out


class Parser:
    """Recursive descent over the lines of one document, by indentation."""

    def __init__(self, lines):
        self.lines = lines
        self.i = 0

    def peek(self):
        """(indent, content) of the next significant line, or None."""
        while self.i < len(self.lines):
            raw = self.lines[self.i]
            content = strip_comment(raw)
            if content.strip() == "":
                self.i += 1
                continue
            return len(content) - len(content.lstrip(" ")), content.strip()
        return None

    def block(self, indent):
        nxt = self.peek()
        if nxt is None or nxt[0] < indent:
            return None
        ind, content = nxt
        if content.startswith("- ") or content == "-":
            return self.sequence(ind)
        return self.mapping(ind)

    def literal(self, parent_indent, chomp):
        body, block_indent = [], None
        while self.i < len(self.lines):
            raw = self.lines[self.i]
            if raw.strip() == "":
                body.append("")
                self.i += 1
                continue
            ind = len(raw) - len(raw.lstrip(" "))
            if ind <= parent_indent:
                break
            if block_indent is None:
                block_indent = ind
            body.append(raw[block_indent:])
            self.i += 1
        while body and body[-1] == "":
            body.pop()
        return "\n".join(body) + ("" if chomp == "-" else "\n")

    def value_after(self, rest, indent):
        """The value of `key: rest` or `- rest` whose line is at `indent`."""
        if rest in ("|", "|-", "|+"):
            return self.literal(indent, rest[1:])
        if rest == "":
            nxt = self.peek()
            if nxt is None:
                return None
            if nxt[0] > indent:
                return self.block(nxt[0])
            if nxt[0] == indent and nxt[1].startswith("- "):
                return self.sequence(indent)  # a sequence may sit at its key's indent
            return None
        return parse_scalar(rest)

    def mapping(self, indent):
        out = {}
        while True:
            nxt = self.peek()
            if nxt is None or nxt[0] != indent or nxt[1].startswith("- "):
                return out
            m = re.match(r"""^("[^"]*"|'[^']*'|[^:'"]+?)\s*:(\s+(.*))?$""", nxt[1])
            if not m:
                raise ValueError("line %d: not a mapping entry: %r" % (self.i + 1, nxt[1]))
            key = parse_scalar(m.group(1))
            self.i += 1
            out[key] = self.value_after((m.group(3) or "").strip(), indent)

    def sequence(self, indent):
        out = []
        while True:
            nxt = self.peek()
            if nxt is None or nxt[0] != indent or not (nxt[1].startswith("- ") or nxt[1] == "-"):
                return out
            rest = nxt[1][1:].strip()
            if re.match(r"""^("[^"]*"|'[^']*'|[^:'"\[{]+?)\s*:(\s|$)""", rest):
                # "- key: value": a mapping whose keys sit at the dash's indent + 2.
                self.lines[self.i] = " " * (indent + 2) + rest
                out.append(self.mapping(indent + 2))
            else:
                self.i += 1
                out.append(self.value_after(rest, indent))


def load_documents(path, text=None):
    """The non-empty documents of a YAML file (or of `text`), in order."""
    if text is None:
        with open(path) as f:
            text = f.read()
    mini = mini_yaml_documents(text)
    try:
        import yaml
    except ImportError:
        return mini
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    if docs != mini:
        raise AssertionError("the subset YAML reader disagrees with PyYAML on %s" % path)
    return docs


if __name__ == "__main__":
    import sys

    # python3 manifests.py FILE: prints the documents as one JSON array.
    json.dump(load_documents(sys.argv[1]), sys.stdout, indent=1)
    print()
