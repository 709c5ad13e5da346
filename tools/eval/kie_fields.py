"""The core invoice fields quarry's extraction is scored on, and how a predicted value is compared."""

CORE_FIELDS = ["invoice_number", "issue_date", "currency", "seller.name", "seller.tax_id", "buyer.name",
               "totals.net", "totals.vat", "totals.gross"]


def get_field(obj, dotted):
    """The value at a dotted path ("seller.name"), or None."""
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def same_value(a, b):
    """Exact match; numbers equal within 0.005 (amounts are given to the cent)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool) \
            and not isinstance(b, bool):
        return abs(float(a) - float(b)) < 0.005
    return a == b
