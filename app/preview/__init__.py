"""Change preview (``pilotfish diff``): a push that publishes nothing. Pure: the change as
events (``change.py``), the proxies of a mesh read from its objects (``proxies.py``), the push
computed and compared with what is served (``push.py``) and its readable and JSON forms
(``render.py``)."""
