"""The bundled mini suite: generated shell chores in the ClawGym format (`families`, `generate`)."""
