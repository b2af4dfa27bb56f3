"""The pretend shop: a real HTTP service the demo syncs from (run it with ``python -m synclane_demo.shop``)."""
