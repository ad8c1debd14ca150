"""Validation of Istio config as istiod's webhook and pilot/pkg/config/validation do it: per-kind
checks (``spec``: parsing and the networking kinds; ``traffic``: DestinationRule and
VirtualService; ``security``: the security kinds), the field checks they share (``fields``),
and the warnings for fields accepted but not applied yet (``not_applied``). Each problem is a
FieldError naming the field path."""
