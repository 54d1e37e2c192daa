"""The platforms: each one the machine described and the model of its loader (Windows, Linux).

A platform room never imports another platform's; what both need lives in a neutral room
(``_facts``, ``_binary``, ``_report``).
"""
