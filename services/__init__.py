"""Deployable services: each a thin server around `clawgym`. Services never import each other."""
