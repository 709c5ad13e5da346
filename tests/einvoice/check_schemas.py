#!/usr/bin/env python3
"""Checks the shipped JSON Schemas with a second, independent implementation (python-jsonschema):
each must be a valid draft 2020-12 schema (the dialect it declares) and a valid draft-07 schema
(the subset our validators and the grammar compiler keep to). Exit status 0 when all pass.

usage: check_schemas.py SCHEMA_DIR
"""
import json
import pathlib
import sys

from jsonschema import Draft7Validator, Draft202012Validator
from jsonschema.exceptions import SchemaError


def main() -> int:
    schema_dir = pathlib.Path(sys.argv[1])
    paths = sorted(schema_dir.glob("*.schema.json"))
    if not paths:
        print(f"{schema_dir}: no *.schema.json", file=sys.stderr)
        return 1
    failed = 0
    for path in paths:
        schema = json.loads(path.read_text(encoding="utf-8"))
        for validator in (Draft202012Validator, Draft7Validator):
            try:
                validator.check_schema(schema)
            except SchemaError as e:
                failed += 1
                print(f"{path.name}: not a valid {validator.__name__} schema: {e.message} at {list(e.path)}",
                      file=sys.stderr)
    print(f"checked {len(paths)} schemas, {failed} failures")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
