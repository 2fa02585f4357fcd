"""cvxpy"""
