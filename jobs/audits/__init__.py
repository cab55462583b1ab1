"""Label audits: confident learning over out-of-sample predictions, which given labels are probably wrong.

Pure numpy; imports nothing else of ``jobs``.
"""
