"""One CSV record at a time: fields separated by commas, optionally double-quoted.

Inside a quoted field a doubled quote (``""``) stands for one quote character.
"""


def split(line, sep=","):
    """The fields of one record."""
    fields = []
    field = []
    quoted = False
    i = 0
    while i < len(line):
        c = line[i]
        if quoted:
            if c == '"':
                quoted = False
            else:
                field.append(c)
        elif c == '"':
            quoted = True
        elif c == sep:
            fields.append("".join(field))
            field = []
        else:
            field.append(c)
        i += 1
    if quoted:
        raise ValueError("unterminated quoted field")
    fields.append("".join(field))
    return fields


def join(fields, sep=","):
    """One record from fields, quoting where needed."""
    out = []
    for f in fields:
        if any(c in f for c in (sep, '"', "\n")):
            out.append('"' + f.replace('"', '""') + '"')
        else:
            out.append(f)
    return sep.join(out)
