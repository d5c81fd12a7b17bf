"""BENCHMARKS.md is written by several scripts: bench/run.py the head, and each of the others
(linking.py, hostile.py, instructions.py) a section of its own, headed `## <title>`. Writing one
replaces that section alone, wherever it stands, and keeps every other."""


def write_section(path, mark, lines):
    """Replaces the section that starts with `mark` ("\\n## Title\\n") by `lines`, or appends it."""
    text = open(path).read()
    before, _, after = text.partition(mark)
    rest = ""
    if after:
        following = after.find("\n## ")
        rest = after[following:] if following >= 0 else ""
    open(path, "w").write(before.rstrip("\n") + "\n" + mark + "\n" + "\n".join(lines) + rest.rstrip("\n") + "\n")
