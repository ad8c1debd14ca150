"""One proxy's xDS from istiod and from pilotfish, side by side: resources as plain data
(``normalize``), a per-resource diff judged against the reviewed list of intended differences
(``diff``, ``expected_differences.yaml``), and the comparison of two fetched configs
(``compare``). Used by ``pilotfish compare-istiod`` and the differential test."""
