"""Class sessions: a teacher's page that students follow and answer questions on, kept in a shared store.

The layout and the rules between the packages: docs/architecture.md.
"""
