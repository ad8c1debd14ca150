"""Kubernetes resource quantities in their canonical form, as resource.Quantity.String() writes
them after a round trip through the Go types (``2000m`` is ``"2"``, ``1024Mi`` is ``"1Gi"``)."""

from __future__ import annotations

import re
from fractions import Fraction

_NUMBER = re.compile(r"^([+-]?)(\d*)(?:\.(\d*))?(.*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?\d+)$")
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIX = {v // 10: k for k, v in _BINARY.items()}
_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    pass


def canonical_quantity(text: str) -> str:
    """``text`` as resource.ParseQuantity(text).String() writes it."""
    m = _NUMBER.match(text.strip())
    if not m or not (m.group(2) or m.group(3)):
        raise QuantityError(
            f"quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {text!r}"
        )
    sign, whole, fraction, suffix = m.groups()
    value = Fraction(int(whole or "0")) + (Fraction(int(fraction), 10 ** len(fraction)) if fraction else 0)
    if sign == "-":
        value = -value
    if suffix in _BINARY:
        value *= 2 ** _BINARY[suffix]
        kind = "binary"
    elif suffix in _DECIMAL:
        value *= Fraction(10) ** _DECIMAL[suffix]
        kind = "decimal"
    elif exponent := _EXPONENT.match(suffix):
        value *= Fraction(10) ** int(exponent.group(1))
        kind = "exponent"
    else:
        raise QuantityError(f"unable to parse quantity's suffix: {text!r}")
    # the smallest unit a Quantity holds is 1n: finer values round up (away from zero)
    if value % _NANO:
        value = (value // _NANO + (1 if value > 0 else 0)) * _NANO
    if value == 0:
        return "0"
    if kind == "binary" and (-1024 < value < 1024 or value.denominator != 1):
        kind = "decimal"
    if kind == "binary":
        amount, power = int(value), 0
        while amount % 1024 == 0 and power < max(_BINARY_SUFFIX):
            amount //= 1024
            power += 1
        return f"{amount}{_BINARY_SUFFIX.get(power, '')}"
    exponent_ = 0
    while value.denominator != 1:
        value *= 10
        exponent_ -= 1
    mantissa = int(value)
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent_ += 1
    rest = exponent_ % 3  # down to a multiple of 3, as AsCanonicalBytes
    mantissa *= 10**rest
    exponent_ -= rest
    if kind == "exponent":
        return f"{mantissa}e{exponent_}" if exponent_ else str(mantissa)
    if exponent_ > 18:
        mantissa *= 10 ** (exponent_ - 18)
        exponent_ = 18
    return f"{mantissa}{_DECIMAL_SUFFIX[exponent_]}"
