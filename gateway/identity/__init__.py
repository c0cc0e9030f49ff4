"""Who is calling, as both the RPC path and the store need it: the API key's one
shape and hash (keys) and the network a stored client address is cut to (netmask).

A leaf: the pipeline reads a key and the store makes one, so neither imports the
other for it. May import: nothing.
"""
