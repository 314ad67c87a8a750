"""XML inputs for the Pascal VOC fuzzer (``tools/fuzz_loaders.py --format voc``).

:func:`voc_xml` writes a VOC annotation; :func:`mutate_xml` returns one mutation of an XML
document: an odd number or class name, a deleted or repeated element, a prolog with an
entity bomb ("billion laughs"), an external entity, a parameter entity or an external DTD, an
undefined or invalid character reference, deep nesting, a huge attribute, many elements,
another encoding (declared or not), an XInclude element, or a byte-level change.

Example:
    >>> import random
    >>> data, what = mutate_xml(voc_xml([("dog", (1, 2, 3, 4))]).encode(), random.Random(0))
    >>> isinstance(data, bytes)
    True
"""

from __future__ import annotations

import random
from typing import Any

__all__ = ["voc_xml", "mutate_xml"]


def voc_xml(objects: list[tuple[str, tuple[Any, ...]]], size: tuple[Any, Any] = (353, 500)) -> str:
    """A Pascal VOC annotation with ``objects`` ``(name, (xmin, ymin, xmax, ymax))``.

    Example:
        >>> "<xmin>1</xmin>" in voc_xml([("dog", (1, 2, 3, 4))])
        True
    """
    parts = [f"<annotation><folder>VOC2007</folder><filename>000001.jpg</filename>"
             f"<size><width>{size[0]}</width><height>{size[1]}</height><depth>3</depth></size>"]
    for name, box in objects:
        coords = "".join(f"<{k}>{v}</{k}>" for k, v in zip(("xmin", "ymin", "xmax", "ymax"), box, strict=True))
        parts.append(f"<object><name>{name}</name><difficult>0</difficult>"
                     f"<bndbox>{coords}</bndbox><part><name>head</name><bndbox>"
                     f"<xmin>1</xmin></bndbox></part></object>")
    return "".join(parts) + "</annotation>"


_XML_NUMBERS = ["", " ", "-1", "0", "1", "nan", "inf", "-inf", "1e400", "1_0", "\uff11\uff12",
                "0x10", " 12 ", "12.5", "abc", "9" * 5000, "1e308", "+3", "١٢", "12\x0b",
                "&#49;&#50;", "&amp;", "<![CDATA[12]]>", "1<!-- c -->2", "&#0;", "&bogus;"]
_BOMB = ('<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
         + "".join(f'<!ENTITY lol{i} "{("&lol%s;" % (i - 1 or "")) * 10}">' for i in range(1, 10))
         + ']>')
_PROLOGS = [
    _BOMB, '<!DOCTYPE a SYSTEM "file:///etc/passwd">', '<!DOCTYPE a SYSTEM "http://127.0.0.1/x.dtd">',
    '<!DOCTYPE a [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
    '<!DOCTYPE a [<!ENTITY % p SYSTEM "http://127.0.0.1/p.dtd"> %p;]>',
    '<!DOCTYPE a [<!ENTITY x "xx">]>', '<!DOCTYPE a [<!ELEMENT a ANY>]>',
    '<!DOCTYPE a PUBLIC "-//x//y" "http://127.0.0.1/y.dtd">', '<?xml version="1.0"?>',
    '<?xml version="1.0" encoding="ebcdic-cp-us"?>', '<?xml version="1.0" encoding="x-unknown"?>',
    '<?xml-stylesheet href="http://127.0.0.1/s.xsl"?>', "<!-- a comment -->",
    '<?xml version="1.1"?>', '<?xml version="2.0"?>',
]


def mutate_xml(seed: bytes, rng: random.Random) -> tuple[bytes, str]:
    """One random mutation of the XML document ``seed`` (text, structure, prolog or bytes)."""
    text = seed.decode("utf-8", "replace")
    kind = rng.choice(["number"] * 5 + ["name", "delete", "duplicate", "prolog", "entity_use",
                       "deep", "attribute", "many", "encoding", "bytes", "bytes", "xinclude"])
    if kind in ("number", "name", "delete", "duplicate"):
        tags = ["width", "height", "xmin", "ymin", "xmax", "ymax"] if kind == "number" else (
            ["name", "bndbox", "size", "object", "xmin", "width"])
        tag = rng.choice(tags)
        start, end = f"<{tag}>", f"</{tag}>"
        positions = [i for i in range(len(text)) if text.startswith(start, i)]
        if not positions:
            return seed, f"no <{tag}>"
        i = rng.choice(positions)
        j = text.find(end, i)
        if j < 0:
            return seed, f"no </{tag}>"
        whole = text[i:j + len(end)]
        if kind == "number":
            new = start + rng.choice(_XML_NUMBERS) + end
        elif kind == "name":
            new = start + rng.choice(["cat ", "Cat", "", "unknown", "dog\x00", "d&#111;g",
                                      "<b>dog</b>", "dog<b/>x"]) + end if tag == "name" else ""
        elif kind == "delete":
            new = ""
        else:
            new = whole * rng.choice([2, 3])
        return (text[:i] + new + text[j + len(end):]).encode(), f"{kind} {whole[:40]!r} -> {new[:40]!r}"
    if kind == "prolog":
        prolog = rng.choice(_PROLOGS)
        body = text.split("?>", 1)[1] if text.lstrip().startswith("<?xml") else text
        use = "&lol9;" if prolog is _BOMB else ("&x;" if "ENTITY x" in prolog else "")
        body = body.replace("<folder>", "<folder>" + use, 1)
        return (prolog + body).encode(), f"prolog {prolog[:50]!r}"
    if kind == "entity_use":
        ref = rng.choice(["&x;", "&lol;", "&#x110000;", "&#xD800;", "&#1;", "&quot;&apos;"])
        return text.replace("<folder>", "<folder>" + ref, 1).encode(), f"entity {ref}"
    if kind == "deep":
        depth = rng.choice([63, 64, 65, 1000, 100_000])
        nest = "<d>" * depth + "</d>" * depth
        return text.replace("</annotation>", nest + "</annotation>").encode(), f"depth {depth}+"
    if kind == "attribute":
        size = rng.choice([10, 100_000, 5_000_000])
        attr = f' a="{"x" * size}" b="1" b2="&lt;"'
        return text.replace("<annotation", "<annotation" + attr, 1).encode(), f"attr {size}"
    if kind == "many":
        count = rng.choice([1000, 200_001])
        return text.replace("</annotation>", "<e/>" * count + "</annotation>").encode(), (
            f"{count} elements")
    if kind == "encoding":
        codec = rng.choice(["utf-16", "utf-16-le", "latin-1", "utf-32", "cp1252"])
        declared = rng.choice([codec, "utf-8", None])
        body = text.split("?>", 1)[1] if text.lstrip().startswith("<?xml") else text
        prolog = f'<?xml version="1.0" encoding="{declared}"?>' if declared else ""
        try:
            return (prolog + body.replace("dog", "d\u00f6g")).encode(codec), (
                f"encoded {codec}, declared {declared}")
        except UnicodeEncodeError:
            return (prolog + body).encode("utf-8"), f"declared {declared}"
    if kind == "xinclude":
        inc = '<xi:include xmlns:xi="http://www.w3.org/2001/XInclude" href="/etc/passwd"/>'
        return text.replace("<folder>", inc + "<folder>", 1).encode(), "xinclude"
    data = bytearray(seed)
    pos = rng.randrange(max(len(data), 1))
    choice = rng.randrange(3)
    if choice == 0:
        return bytes(data[:pos]), f"truncate at {pos}"
    if choice == 1 and data:
        data[pos] = rng.randrange(256)
        return bytes(data), f"byte {pos} := {data[pos]}"
    bad = rng.choice([b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf"])
    return bytes(data[:pos]) + bad + bytes(data[pos:]), f"insert {bad!r} at {pos}"


